"""Texts shipped with the package: calibration and validation samples, and the labelled datasets' loader."""
