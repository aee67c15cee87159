"""``tritongen build``: the plan, its stages in order, and the model card."""
