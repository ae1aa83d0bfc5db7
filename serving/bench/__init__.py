"""The benchmark protocol: runs, summaries, reports, exports, traces, the knee's figure, compare and hypotheses."""
