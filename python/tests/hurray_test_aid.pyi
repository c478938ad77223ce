# SPDX-License-Identifier: Apache-2.0
"""Stub of the tests' native aid (aid/hurray_test_aid.c)."""

def release_on_native_thread(obj: object, delay: float = 0.0, wait: bool = True) -> None: ...
