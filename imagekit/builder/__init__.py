"""Building, on the host: the plan, BuildKit runs, contexts, inputs, base images. (Not
`build/`: tools and the usual Python .gitignore treat a folder of that name as output.)"""
