"""edgegcl: AdNGCL graph contrastive learning with the HANS negative scheduler."""

__version__ = "0.1.0"
