"""Independent float64 references, and the transformers 5.17.0 modules run in float64."""
