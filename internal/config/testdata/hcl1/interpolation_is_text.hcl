# HCL 1 keeps "${...}" as text; CTS never interpolates.
task {
  name        = "web"
  description = "costs ${price} today, %{ not a directive }"
  module      = "./m"
  condition "services" {
    filter = "Service.Meta.v == \"${x}\""
    names  = ["web"]
  }
}
