"""`kvplan fit`: the inverse question. Given a model, the traffic and the objectives, which GPU, how
many, with which settings, and at what cost: `fit(FitRequest, Executor) -> FitResult`."""
