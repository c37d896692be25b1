# Test fixture for the safety gates: one resource per service instance, so
# that deregistering instances destroys resources. Each instance's rule is a
# file <dir>/<id>.rule holding the CIDR it opens: the instance's meta "cidr"
# when set, else its address as a /32.
terraform {
  required_providers {
    local = { source = "hashicorp/local" }
  }
}

variable "services" {
  type = map(object({
    id      = string
    name    = string
    address = string
    port    = number
    meta    = map(string)
  }))
}

variable "dir" {
  type = string
}

resource "local_file" "instance" {
  for_each = var.services
  filename = "${var.dir}/${each.value.id}.rule"
  content  = lookup(each.value.meta, "cidr", "${each.value.address}/32")
}
