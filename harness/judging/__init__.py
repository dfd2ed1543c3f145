"""Reading results: statistics across runs, ranking, comparison, the gates, history, summaries."""
