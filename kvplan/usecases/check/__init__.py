"""`kvplan check`: capacity and workload assertions on a plan or a saved profile, for CI.

spec (the file) -> target (plan or profile) -> assertions evaluated (capacity, workload)
-> one report rendered as a table, JSON, JUnit XML and a Markdown summary."""
