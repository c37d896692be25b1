# Test fixture: every apply fails with a clear error.
variable "services" {
  type = any
}

resource "terraform_data" "fail" {
  input = length(var.services)

  lifecycle {
    precondition {
      condition     = length(var.services) < 0
      error_message = "this module always fails"
    }
  }
}
