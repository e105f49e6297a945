"""User text made safe for each output format: valid Unicode everywhere (a lone surrogate becomes
U+FFFD), and in XML and HTML no character those formats cannot carry (a control character is
written as its `\\xNN` escape). Rich consoles get `rich.text.Text` or escaped markup instead: see
`plain`."""

from __future__ import annotations

import html
import re

_SURROGATE = re.compile("[\ud800-\udfff]")
# XML 1.0 chars: tab, newline, carriage return, U+0020-U+D7FF, U+E000-U+FFFD, U+10000-U+10FFFF
_NOT_XML = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_C1 = re.compile("[\u007f-\u009f]")


def valid_text(text: str) -> str:
    """The text with every lone surrogate replaced by U+FFFD: encodable as UTF-8, valid in JSON."""
    return _SURROGATE.sub("\ufffd", text)


def markup_text(text: str) -> str:
    """Text XML 1.0 and HTML can carry: control characters as visible `\\xNN`, lone surrogates as U+FFFD."""
    def visible(match: re.Match[str]) -> str:
        char = match.group(0)
        return "\ufffd" if 0xD800 <= ord(char) <= 0xDFFF else f"\\x{ord(char):02x}"
    return _C1.sub(visible, _NOT_XML.sub(visible, text))


def html_text(value: object) -> str:
    """Any value shown in an HTML page: escaped, and only characters HTML can carry."""
    return html.escape(markup_text(str(value)))


# what a terminal would act on rather than show: every C0 control but tab and newline (escape
# sequences, carriage returns, bells), DEL and the C1 controls
_TERMINAL_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal_text(text: str) -> str:
    """Text a terminal shows as written: control characters as visible `\\xNN`, lone surrogates as U+FFFD."""
    return _TERMINAL_CONTROL.sub(lambda match: f"\\x{ord(match.group(0)):02x}", valid_text(text))


def plain(text: object) -> str:
    """User text inside rich markup: escaped, so that `[bold]` or `[/]` in a name prints as written,
    and its control characters shown, never sent to the terminal (`terminal_text`)."""
    from rich.markup import escape  # JSON output imports this module and never needs rich

    return escape(terminal_text(str(text)))
