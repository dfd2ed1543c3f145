"""Showing results: terminal tables, the report, the dashboard."""
