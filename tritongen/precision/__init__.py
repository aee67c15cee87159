"""Lower precision that keeps accuracy: FP16/INT8 conversion, the INT8 search and its report."""
