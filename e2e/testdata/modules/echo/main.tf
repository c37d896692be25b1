# Test fixture of the input-limit, policy and redaction tests: Terraform's
# built-in provider only (nothing to install); the plan shows var.values.
variable "services" {
  type    = any
  default = {}
}

variable "values" {
  type = list(string)
}

resource "terraform_data" "echo" {
  input = var.values
}
