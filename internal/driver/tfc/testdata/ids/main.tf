# A module with no provider: it records the instance ids it is given in a
# terraform_data resource (Terraform >= 1.4), so a test can read them back
# from the workspace's state.
variable "services" {
  type = any
}

variable "label" {
  type    = string
  default = "none"
}

resource "terraform_data" "ids" {
  input = "${var.label}:${join(",", sort([for s in var.services : s.id]))}"
}

output "ids" {
  value = terraform_data.ids.output
}

output "secret" {
  value     = "s3cret"
  sensitive = true
}
