# Test fixture (spread mode benchmark): a heavy apply. Every apply of a new
# catalog runs a local-exec that burns CPU in one process (var.burn loop
# iterations of awk: about 1 s of CPU per 50 million on the reference
# machine), then writes the services, like services_file, into
# var.dir/services.json.
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

variable "burn" {
  type    = number
  default = 50000000
}

resource "terraform_data" "work" {
  triggers_replace = [jsonencode(var.services)]

  provisioner "local-exec" {
    command = "awk 'BEGIN { s = 0; for (i = 0; i < ${var.burn}; i++) s += i; exit 0 }'"
  }
}

resource "local_file" "services" {
  filename   = "${var.dir}/services.json"
  content    = jsonencode(var.services)
  depends_on = [terraform_data.work]
}
