# Test fixture: every apply of a new catalog runs a local-exec that appends
# "<CTSYNC_E2E_ID> <unix nanoseconds>" to var.heartbeats every 250 ms,
# var.beats times (a side effect spread over time), then writes the
# services, like services_file, into var.dir/services.json.
terraform {
  required_providers {
    local = { source = "hashicorp/local" }
  }
}

variable "services" {
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
  type = string
}

variable "heartbeats" {
  type = string
}

variable "beats" {
  type    = number
  default = 40
}

resource "terraform_data" "beat" {
  triggers_replace = [jsonencode(var.services)]

  provisioner "local-exec" {
    command = "i=0; while [ $i -lt ${var.beats} ]; do echo \"$CTSYNC_E2E_ID $(date +%s%N)\" >> '${var.heartbeats}'; sleep 0.25; i=$((i+1)); done"
  }
}

resource "local_file" "services" {
  filename   = "${var.dir}/services.json"
  content    = jsonencode(var.services)
  depends_on = [terraform_data.beat]
}
