# cpu_ns PID: the process's time on a CPU so far, in ns: its live threads' `schedstat`,
# summed. /proc/PID/stat's utime and stime count 10 ms ticks, 1% of a one-second round.
# A thread that ends takes its time out of the sum: lingo's threads live through a run.
# (bench-peers.sh sums a whole process tree the same way, in its own proc.py.)
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%.0f\n", s}'; }
