"""The configuration rules vLLM applies before it sizes anything."""
