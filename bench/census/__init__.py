# SPDX-License-Identifier: Apache-2.0
"""Helpers of bench/leak_census.py: the shared stats board (board.py), what
is left behind as /proc shows it (proc.py), the tools under test (tools.py),
the producer and consumer loops (roles.py), the supervisor that kills and
replaces them (supervise.py), Ray (ray_tool.py) and the report (report.py)."""
