"""The experiment report: short answers by stated rules, first, cross-model figures, report.md and report.html."""
