# Compatibility fixture: uses the echo test provider (configured by the
# task's terraform_provider block) and writes what the provider received,
# and a digest of an environment variable set through task_env, into var.dir.
terraform {
  required_providers {
    local = { source = "hashicorp/local" }
    echo  = { source = "ctsync/echo" }
  }
}

variable "services" {
  description = "Consul services monitored by the task (CTS service definition protocol v0)"
  type = map(object({
    id                    = string
    name                  = string
    kind                  = string
    address               = string
    port                  = number
    meta                  = map(string)
    tags                  = list(string)
    namespace             = string
    status                = string
    node                  = string
    node_id               = string
    node_address          = string
    node_datacenter       = string
    node_tagged_addresses = map(string)
    node_meta             = map(string)
    cts_user_defined_meta = map(string)
  }))
}

variable "dir" {
  description = "Where to write what the module received"
  type        = string
}

data "echo_config" "this" {}

resource "local_file" "provider" {
  filename = "${var.dir}/provider.json"
  content  = data.echo_config.this.json
}

resource "terraform_data" "task_env" {
  triggers_replace = [data.echo_config.this.json]
  provisioner "local-exec" {
    command = "printf %s \"$CTSYNC_COMPAT_SECRET\" | sha256sum | cut -d' ' -f1 > '${var.dir}/task_env.sha256'"
  }
}
