# Soak fixture (e2e/soak_test.go): the heartbeat module's side effect with
# the record the soak checker needs. Every apply of a new catalog runs a
# local-exec that appends
#   beat <CTSYNC_E2E_ID> <task> <run> <digest> <unix ns>
# to var.effects every 250 ms, var.beats times, then writes the services
# into var.dir/services.json, then appends one
#   done <CTSYNC_E2E_ID> <task> <run> <digest> <unix ns>
# <run> is the apply's own id (terraform_data's), <digest> the md5 of the
# sorted service IDs joined by ",": which catalog version the apply carries.
# Lines are short single appends (atomic with O_APPEND), so every member
# can write the one log.
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

variable "name" {
  type = string
}

variable "dir" {
  type = string
}

variable "effects" {
  type = string
}

variable "beats" {
  type    = number
  default = 4
}

locals {
  digest = md5(join(",", sort([for s in var.services : s.id])))
}

resource "terraform_data" "beat" {
  triggers_replace = [jsonencode(var.services)]

  provisioner "local-exec" {
    command = "i=0; while [ $i -lt ${var.beats} ]; do echo \"beat $CTSYNC_E2E_ID ${var.name} ${self.id} ${local.digest} $(date +%s%N)\" >> '${var.effects}'; sleep 0.25; i=$((i+1)); done"
  }
}

resource "local_file" "services" {
  filename   = "${var.dir}/services.json"
  content    = jsonencode(var.services)
  depends_on = [terraform_data.beat]
}

resource "terraform_data" "done" {
  triggers_replace = [terraform_data.beat.id]
  depends_on       = [local_file.services]

  provisioner "local-exec" {
    command = "echo \"done $CTSYNC_E2E_ID ${var.name} ${terraform_data.beat.id} ${local.digest} $(date +%s%N)\" >> '${var.effects}'"
  }
}
