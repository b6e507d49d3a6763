"""madohub_nb.pipeline"""
