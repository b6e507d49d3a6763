"""madohub_nb.notebook"""
