"""Layer 3, the use cases: plan, profile, replay, simulate and check, each a typed request in and
a typed frozen result out. Nothing here renders."""
