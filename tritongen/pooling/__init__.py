"""Sentence-embedding pooling, described once: the methods (``methods``) and the heads after them (``heads``).

What a checkpoint asks for is read by ``tritongen.model.checkpoint`` (its ``Pooling``); the embedding task
builds its graph from :func:`~tritongen.pooling.methods.pooling_method` and its fold from
:func:`~tritongen.pooling.heads.embedding_tail`.
"""
