"""madohub_nb.io"""
