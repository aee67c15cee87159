"""Serving and operating a repository: tritonserver, supervision, health, admin, roll-outs, stats, client."""
