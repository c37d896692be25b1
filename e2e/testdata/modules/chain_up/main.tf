# Test fixture: the upstream task of a chain. Its output "ids" lists the
# instances it was given; no provider needed.
variable "services" {
  type = any
}

resource "terraform_data" "ids" {
  input = join(",", sort([for s in values(var.services) : s.id]))
}

output "ids" {
  value = terraform_data.ids.output
}

output "count" {
  value = length(var.services)
}
