// Several arguments on one line, without commas (seen in the wild).
log_level   = "INFO"
working_dir = "sync-tasks" port        = 8558
log_level = "debug"
consul { address = "https://10.0.0.1:8501" token = "abc" tls { ca_cert = "/etc/ca.pem" } }
