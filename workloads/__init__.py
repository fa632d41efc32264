"""What one training step does: models, FLOPs, parallel plans, recipes, schedules, task graphs."""
