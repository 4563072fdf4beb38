"""MiniWoB++ web tasks in Chromium through BrowserGym (:class:`BrowserEnvironment`)."""

from browser_env.server import TASKS, BrowserEnvironment, Observation, screenshot

__all__ = ["TASKS", "BrowserEnvironment", "Observation", "screenshot"]
