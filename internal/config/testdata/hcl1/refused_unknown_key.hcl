# refused: did you mean "working_dir"
buffer_period { enabled = true, min = "5s" }
worknig_dir = "x"
