// Owner of the shared torch precompiled header; holds no code.
