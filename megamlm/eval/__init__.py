"""Fine-tuning evaluation: the paper's protocol (LR grid x seeds, best LR on validation, test mean and
95% CI) over sequence classification, token classification, extractive QA and retrieval tasks."""
