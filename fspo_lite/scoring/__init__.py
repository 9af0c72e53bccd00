"""Stage 3, scoring: answer grading, sentence verification, rewards per method, and the advantages a step trains on."""
