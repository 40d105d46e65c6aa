"""The experiment report: one-sentence answers by stated rules, cross-model figures, report.md and report.html."""
