"""Public pmap programs rewritten and run beside their originals.

`python -m bench.real_programs.run` (see there); `conll` writes the
synthetic CoNLL-U files flax's nlp_seq reads; `wmt_constructs` and
`imagenet_constructs` are stand-ins with the pmap constructs of flax's
examples/wmt and examples/imagenet.
"""
