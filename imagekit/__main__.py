from imagekit.cli import main

main()
