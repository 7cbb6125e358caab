"""Text around the model: the chat template, incremental detokenizing and stop strings, sampling."""
