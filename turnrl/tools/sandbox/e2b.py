class E2BSandbox: pass
