"""Decoder-only language models, the machinery behind `workflows.language_model`.

- `models`: `GPT`, a GPT-style stack of the kit's layers with cached one-token steps;
- `batching`: windows of a token stream for next-token training, on any backend;
- `generator`: the exported `Generator` folder (model, vocabulary) that turns prompts
  into continuations with keras-hub samplers (greedy, beam, top-k, top-p, temperature);
- `pyfunc`: the generator as an MLflow model, sampler settings as params.

A logged language model ships this package, `layers/` and `data_prep/`, nothing else.
"""
