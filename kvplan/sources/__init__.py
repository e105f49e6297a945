"""Layer 2, beside `measure` and below it: where the inputs the semantics read come from, read here so
that `kvplan.semantics` stays pure (no files, no environment, no network; tests/test_layers.py).

    models      the config.json behind --model: a local directory or file, the bundled catalog, the
                Hugging Face cache, the hub (`resolve_config -> ResolvedConfig`)
    catalog     the bundled config.json files and their precomputed weight layouts (kvplan/data)
    traces      a replay trace file, read and handed to `semantics.engine.trace.parse_trace`
    installed   the vllm installed beside kvplan, and the release the default rule gives for it

Never torch or transformers (docs/architecture.md)."""
