"""HANS-scheduled contrast: the scheduler, the negatives it chooses, the loss, and the
scheduled-pairs path; ``module.ScheduledContrast`` wraps them for any encoder."""
