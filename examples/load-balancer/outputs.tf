output "backends" {
  description = "The host:port pairs nginx balances over."
  value       = local.backends
}
