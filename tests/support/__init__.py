"""Test support code: a pinned real Claude Code CLI and a scripted loopback model server."""
