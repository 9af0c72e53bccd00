"""Stage 1, data: QA examples and their loaders, the data folder, the training set, prompts, gold labels."""
