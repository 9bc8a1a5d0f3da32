#!/bin/sh
# Stands in for Bazel's downloaded coverage tools, which this offline build does not have.
echo "zerotrain: 'bazel coverage' needs remote_coverage_tools, which this offline build does not ship" >&2
exit 1
