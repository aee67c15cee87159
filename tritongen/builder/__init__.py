"""``tritongen build``: the plan every stage shares, the stages in order, and the model card.

``pipeline.build_repository`` is the one entry point.
"""
