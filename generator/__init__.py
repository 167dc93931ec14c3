"""Render environments/ through charts/ with helm into apps/: plain manifests, one resource per file."""
