"""Presentation only: tables, traces and charts from results."""
