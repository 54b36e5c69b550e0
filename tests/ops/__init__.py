"""Operations: ansible provisioning, the Grafana dashboards, the monitoring stack, the soak."""
