# ctsync configuration (/etc/ctsync.d/ctsync.hcl).
#
# The service reads every *.hcl and *.json file in /etc/ctsync.d/. Put
# secrets in /etc/ctsync.d/ctsync.env (KEY=value lines, mode 0640, read by
# the systemd unit) and refer to them with {{ env "KEY" }}. After a change:
# `systemctl restart ctsync` (token files and TLS certificates only need
# `systemctl reload ctsync`). Reference: docs/configuration.md.
#
# As shipped, ctsync starts with no task and waits for the local Consul
# agent; it needs no Terraform then. A task needs `terraform` or `tofu`
# (0.14 or newer) on the PATH, or driver "terraform" { path }: without one,
# the task's run fails and says so.

# The API (and the dashboard) listen on loopback only: this machine's users
# and its Consul agent's health check reach them, no other machine does.
# Whoever reaches the API can create and run tasks, which run code as
# ctsync: before serving other machines, add api_auth tokens (below), then
# listen on one of this machine's addresses or on every interface:
#   address = "0.0.0.0"
# The port is `port` (8558 by default), or give it here: "127.0.0.1:8558".
# Without address, ctsync listens on every interface, as CTS does.
address = "127.0.0.1"

# log_level   = "INFO"
# port        = 8558
# working_dir = "/var/lib/ctsync/sync-tasks"

# consul {
#   address = "localhost:8500"
#   token   = "{{ env \"CONSUL_HTTP_TOKEN\" }}"
# }

# driver "terraform" {
#   # `terraform` or `tofu` from the PATH, or a path:
#   # path = "/usr/local/bin/tofu"
#   backend "consul" {
#     gzip = true
#   }
# }

# api_auth {
#   token {
#     name        = "ops"
#     secret_file = "/etc/ctsync.d/ops.token"
#     access      = "write"
#   }
# }

# task {
#   name   = "web-lb"
#   module = "/var/lib/ctsync/modules/lb"
#   condition "services" {
#     names = ["web"]
#   }
# }

# high_availability {
#   cluster {
#     name = "ctsync"
#   }
#   instance {
#     address = "ctsync-01.example.com"
#   }
# }
