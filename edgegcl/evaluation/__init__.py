"""Evaluation of frozen embeddings: the honest probe and the authors' protocol."""
