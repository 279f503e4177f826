"""The network: views (augment), the normalised adjacency, the GCN encoder and head."""
