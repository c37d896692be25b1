{
  "log_level": "debug",
  "task": [
    {"name": "web", "module": "./m", "condition": {"services": {"names": ["web"]}}}
  ]
}
